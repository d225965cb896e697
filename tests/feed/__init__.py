"""The static Feeder, outputs, and the resume contract of every facade."""
