"""A research pipeline for runyard, as a task plugin package."""
