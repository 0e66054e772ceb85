"""The asset graph, one module per pipeline stage."""
