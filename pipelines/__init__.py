"""foreshock."""
