"""Stores of the agent-run backend: the interface and its implementations."""

from runyard.agents.store.base import AgentStore
from runyard.agents.store.memory import MemoryStore
from runyard.agents.store.sqlite import SQLiteStore

__all__ = ["AgentStore", "MemoryStore", "SQLiteStore"]
