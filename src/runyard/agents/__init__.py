"""The agent-run backend: sessions, uploads, mount grants, runs, run workspaces,
run-context, history continuity and session state (DESIGN section 6).

The server holds one :class:`runyard.api.agentservice.AgentService`; ``runyard.api.agents``
puts it on HTTP and ``runyard.cli.agent`` on the command line.
"""
