"""The algorithm API in one import: the contract (:mod:`fedlib.algorithms.contract`: :class:`Algorithm`,
:class:`Round`, :class:`Context`, :class:`LocalTask`, the message declarations), the shared training loops
(:mod:`fedlib.algorithms.loops`) and the parameter helpers (:mod:`fedlib.algorithms.params`).

Methods and the engine import from here; each name lives in one of the three modules.
"""

from __future__ import annotations

from fedlib.algorithms.contract import (Algorithm, ClientData, Context, LocalTask, Message, Metrics, Phase, Round,
                                        TrainSettings, TrainedGroup, check_message, derive_seed)
from fedlib.algorithms.loops import (collected, head_then_body, joint_sgd_epochs, linear_adam_epochs, phase_parameters,
                                     server_epochs, sgd_epochs, steps, train_task)
from fedlib.algorithms.params import (frozen_copy, head_message, head_params, load_head_message, load_model_message,
                                      mean_params, model_message, sample_weights, weights)

__all__ = ["Algorithm", "ClientData", "Context", "LocalTask", "Message", "Metrics", "Phase", "Round", "TrainSettings",
           "TrainedGroup", "check_message", "collected", "derive_seed", "frozen_copy", "head_message", "head_params",
           "head_then_body", "joint_sgd_epochs", "linear_adam_epochs", "load_head_message", "load_model_message",
           "mean_params", "model_message", "phase_parameters", "sample_weights", "server_epochs", "sgd_epochs", "steps",
           "train_task", "weights"]
