"""Security: passwords kept out of messages and artifacts, least privilege, side effects,
identifiers."""
