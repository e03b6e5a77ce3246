"""Training (SPEC §2): configuration, the resumable loop, checkpoints and evaluation."""

from posym.train.config import PRESET_TRAINING, TrainConfig, make_config
from posym.train.evaluate import accuracy_table, evaluate, predict
from posym.train.loop import RunResult, train

__all__ = ["PRESET_TRAINING", "TrainConfig", "make_config", "train", "RunResult", "evaluate", "predict", "accuracy_table"]
