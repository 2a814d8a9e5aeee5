"""Fleet reliability by cohort and location, and its report."""
