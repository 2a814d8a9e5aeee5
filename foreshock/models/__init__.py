"""Risk models, from fitting to the registry.

``estimators`` fit and score (ranked rules, Cox, LightGBM, the bundle of them);
``evaluation`` judges them out of sample (metrics, operating points, the walk-forward
backtest); ``registry`` logs, reviews, promotes and loads registered versions;
``reliability`` describes the fleet's lives (Kaplan–Meier, Weibull, Cox by cohort).
Each imports only those before it (``reliability`` stands apart).
"""
