"""The layout switch: pure rules and next action, then the journal, the executor and the daemon restarts."""
