"""Stage 4, state: the stateful step that merges summaries into windows and emits rows."""
