"""Public traces the simulator replays (pandas lives here and in reports/)."""
