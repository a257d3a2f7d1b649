"""What both training scripts share, so that only the parallel part differs: the settings and the dataset.

The model, the data and the loss are the running example's, as in the DDP lessons: ``examples.make_model()``
(8 -> 16 -> 4), ``examples.regression_batch`` (8 features, 4 real targets) and ``examples.regression_loss``.
"""

from torch.utils.data import TensorDataset

from dpcourse.examples import regression_batch

SEED, SAMPLES, BATCH, LR = 0, 64, 16, 0.1  # BATCH: samples per optimizer step, over all devices


def make_dataset() -> TensorDataset:
    """``SAMPLES`` of the running example's regression samples, drawn from ``SEED``."""
    return TensorDataset(*regression_batch(SAMPLES, SEED))
