"""What users download: benchmark data (API-Bank, Bamboogle, TravelPlanner: the download step and
TFDS builders that prepare it once and serve it through Grain, `download`, `prepared`) and
pretrained models that ship on PyPI (`model_download`), with the one resolver of every
`model_dir` (`model_sources`)."""

# modules
__all__ = ["download", "model_download", "model_sources", "prepared"]
