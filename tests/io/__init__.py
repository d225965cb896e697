"""Sources and readers, per engine, against the real servers."""
