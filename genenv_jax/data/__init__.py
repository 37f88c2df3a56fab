"""Benchmark data that users download (API-Bank, Bamboogle, TravelPlanner): the download step and
TFDS builders that prepare it once and serve it through Grain."""
