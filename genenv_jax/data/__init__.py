"""Benchmark data that users download (API-Bank, Bamboogle, TravelPlanner): the download step and
TFDS builders that prepare it once and serve it through Grain."""

# modules
__all__ = ["download", "model_download", "model_sources", "prepared"]
