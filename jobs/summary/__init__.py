"""Stage 3, summary: each parsed chunk summarised per service inside the read task."""
