"""Feature statistics, Keras layers and the report."""
