"""kimi-ops under faults: processes killed, links cut, Slack refusing calls."""
