"""Registered versions: logging to MLflow, review and promotion, loading, live scoring."""
