"""Privacy: an honest-but-curious server's reconstruction attack on uploaded prototypes.

Typical notebook use (FedMPS Fig. 11)::

    from fedlib.privacy import prototype_attack, attack_figure
    report = prototype_attack(client_model, aux_x, {"low": p_low, "high": p_high}, classes,
                              aux_y=aux_y, client_x=x, client_y=y, steps=10_000,
                              mean=MNIST_MEAN, std=MNIST_STD)
    report.summary()          # PSNR/SSIM: attack vs class-average and single-sample references
    attack_figure(report)

See :mod:`fedlib.privacy.attack` for the threat model.
"""

from fedlib.privacy.attack import (
    LEVEL_OPTIONS,
    AttackReport,
    InversionDecoder,
    InversionResult,
    LevelRun,
    levels_name,
    model_query,
    prototype_attack,
    reconstruct,
    reconstruct_samples,
    single_sample_reference,
    train_inversion,
)
from fedlib.privacy.metrics import (
    class_average_reference,
    class_mean_images,
    psnr_ssim,
    scores_against_class,
    to_unit_range,
)
from fedlib.privacy.plots import attack_figure

__all__ = [
    "LEVEL_OPTIONS",
    "AttackReport",
    "InversionDecoder",
    "InversionResult",
    "LevelRun",
    "attack_figure",
    "class_average_reference",
    "class_mean_images",
    "levels_name",
    "model_query",
    "prototype_attack",
    "psnr_ssim",
    "reconstruct",
    "reconstruct_samples",
    "scores_against_class",
    "single_sample_reference",
    "to_unit_range",
    "train_inversion",
]
