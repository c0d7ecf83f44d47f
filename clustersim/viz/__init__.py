"""Pictures of a Result: Gantt timelines and utilization (matplotlib), from spans only."""
