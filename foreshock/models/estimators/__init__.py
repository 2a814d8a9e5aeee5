"""Risk models that fit on feature snapshots and score them: rules, Cox, LightGBM, their bundle."""
