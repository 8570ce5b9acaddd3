"""State: key groups, keyed state and state backends."""
