"""The pytest11 entry point. It imports only pytest at load time."""
