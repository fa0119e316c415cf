"""Privacy: an honest-but-curious server's reconstruction attack on uploaded prototypes.

Typical notebook use (FedMPS Fig. 11)::

    from fedlib.privacy import prototype_attack, attack_figure
    report = prototype_attack(client_model, aux_x, {"low": p_low, "high": p_high}, classes,
                              aux_y=aux_y, client_x=x, client_y=y, steps=10_000,
                              mean=MNIST_MEAN, std=MNIST_STD)
    report.summary()          # PSNR/SSIM: attack vs class-average and single-sample references
    attack_figure(report)

See :mod:`fedlib.privacy.attack` for the threat model.

The attack library (docs/privacy.md): :mod:`.holds` (what the server holds of each method, from its
declared messages), :mod:`.inversion` (white-box feature inversion, samples per prototype),
:mod:`.gradients` (Inverting Gradients, DLG, iDLG), :mod:`.active` (the imprint server),
:mod:`.defense` (clipping + Gaussian noise, Opacus's RDP accountant), :mod:`.table` (the leakage table),
:mod:`.rounds` (every attack the server holds the inputs of, on one client's next round of a finished run).
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
from fedlib.privacy.active import craft_imprint, recover_imprint
from fedlib.privacy.defense import epsilon, noise_for_epsilon, private_prototypes, private_update
from fedlib.privacy.gradients import client_gradient, dlg, infer_label, invert_gradients, pseudo_gradient
from fedlib.privacy.holds import ServerView, holdings_table, what_server_holds
from fedlib.privacy.inversion import feature_fn, invert_features, samples_per_prototype, total_variation
from fedlib.privacy.metrics import (
    best_match_reference,
    class_average_reference,
    class_mean_images,
    label_accuracy,
    psnr_ssim,
    scores_against_class,
    to_unit_range,
)
from fedlib.privacy.plots import attack_figure
from fedlib.privacy.table import attack_upload, leakage_table, references, score

__all__ = [
    "LEVEL_OPTIONS", "AttackReport", "InversionDecoder", "InversionResult", "LevelRun", "ServerView",
    "attack_figure", "attack_upload", "best_match_reference", "class_average_reference", "class_mean_images",
    "client_gradient", "craft_imprint", "dlg", "epsilon", "feature_fn", "holdings_table", "infer_label",
    "invert_features", "invert_gradients", "label_accuracy", "leakage_table", "levels_name", "model_query",
    "noise_for_epsilon", "private_prototypes", "private_update", "prototype_attack", "pseudo_gradient",
    "psnr_ssim", "reconstruct", "reconstruct_samples", "recover_imprint", "references", "samples_per_prototype",
    "score", "scores_against_class", "single_sample_reference", "to_unit_range", "total_variation",
    "train_inversion", "what_server_holds",
]
