"""Inference-time interventions on a model's attention (docs/interventions.md): context managers that
change only the layers asked for and restore the model exactly on exit. Each intervention is one
registered class (:mod:`posym.interventions.registry`). Compute only (floor 5)."""

# Registration order is the order the parser's messages list the names.
from posym.interventions.registry import REGISTRY, Intervention, register
from posym.interventions.temperature import TEMPERATURE_FAMILIES, Temperature, temperature, temperature_scale
from posym.interventions.rope import ROPE_FAMILIES, Ntk, RopeBase, ntk, ntk_theta, rope_base
from posym.interventions.interpolate import Interpolate, interpolate, interpolation_scale
from posym.interventions.freq_mask import FreqMask, freq_mask
from posym.interventions.yarn import Yarn, yarn
from posym.interventions.spec import NONE, describe, parse_intervention
from posym.interventions.apply import intervened, with_layers
from posym.interventions.plan import check_interventions, holds_under_kv_cache, plan_interventions

__all__ = ["REGISTRY", "Intervention", "register", "TEMPERATURE_FAMILIES", "Temperature", "temperature",
           "temperature_scale", "describe", "NONE", "parse_intervention", "ROPE_FAMILIES", "RopeBase", "Ntk", "ntk",
           "ntk_theta", "rope_base", "FreqMask", "freq_mask", "Interpolate", "interpolate", "interpolation_scale",
           "intervened", "with_layers", "plan_interventions", "check_interventions", "holds_under_kv_cache", "Yarn", "yarn"]
