"""The canonical string of an intervention (``temperature:beta=1,n_train=17,floor=1``) and its parser,
so tables of several interventions concatenate on one ``intervention`` column.

The log-form temperature's string always names its floor (``floor=1``: ``s(n) = max(1, 1 + β·ln(n/N))``,
the default; ``floor=0``: unfloored). Tables written before the floor existed hold strings without the
key (``temperature:beta=0.5,n_train=17``): those rows were measured *unfloored*
(:func:`legacy_temperature`), and their string never equals a new one, so the two are never mixed."""

from __future__ import annotations


from posym.errors import PosymError
from posym.interventions.freq_mask import FreqMask
from posym.interventions.interpolate import Interpolate, check_interpolate
from posym.interventions.rope import RopeBase, check_kappa, check_theta
from posym.interventions.temperature import FORMS, Temperature, check_temperature
from posym.runs.tables import NO_INTERVENTION

NAMES: tuple[str, ...] = ("none", "temperature", "rope-base", "ntk", "interpolate", "freq-mask")
KEYS: dict[str, tuple[str, ...]] = {"none": (), "temperature": ("beta", "n_train", "floor", "form", "layers"),
                                    "rope-base": ("theta",), "ntk": ("kappa",), "interpolate": ("factor", "n_train"),
                                    "freq-mask": ("keep", "layers")}
NONE = NO_INTERVENTION  # the canonical string of the untouched model (one home: posym.runs.tables)
Intervention = Temperature | RopeBase | Interpolate | FreqMask
DEFAULT_N_TRAIN = 17  # the training length of posym runs (SPEC §1)
#: ``freq-mask:keep=none``: no frequency kept (every rotary logit term 0), written out so an empty
#: ``keep=`` (a typo) is refused rather than read as "drop all".
KEEP_NONE = "none"


def _num(x: float) -> str:
    """``1.0`` -> ``1``, ``0.5`` -> ``0.5``, ``1e20`` -> ``1e+20`` (shortest round-trip repr; integers
    written as digits up to 10^15)."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


def describe(intervention: Intervention | None) -> str:
    """The canonical string: name, then ``key=value`` in a fixed order; defaults (form=log, all layers)
    omitted, except the log-form temperature's ``floor`` (always written: ``floor=1`` or ``floor=0``);
    ``None`` (the untouched model) is ``"none"``."""
    if intervention is None:
        return NONE
    if isinstance(intervention, Temperature):
        parts = [f"beta={_num(intervention.beta)}", f"n_train={intervention.n_train}"]
        if intervention.form == "log":
            parts.append(f"floor={int(bool(intervention.floor))}")
        else:
            parts.append(f"form={intervention.form}")
        if intervention.layers is not None:
            parts.append("layers=" + "+".join(str(l) for l in intervention.layers))
        return "temperature:" + ",".join(parts)
    if isinstance(intervention, RopeBase):
        if intervention.kappa is not None:
            return f"ntk:kappa={_num(intervention.kappa)}"
        return f"rope-base:theta={_num(intervention.theta)}"
    if isinstance(intervention, Interpolate):
        if intervention.factor is not None:
            return f"interpolate:factor={_num(intervention.factor)}"
        return f"interpolate:n_train={intervention.n_train}"
    if isinstance(intervention, FreqMask):
        text = "freq-mask:keep=" + ("+".join(str(k) for k in intervention.keep) or KEEP_NONE)
        if intervention.layers is not None:
            text += ",layers=" + "+".join(str(l) for l in intervention.layers)
        return text
    raise PosymError(f"cannot describe {type(intervention).__name__}; known interventions: {', '.join(NAMES)}")


def parse_intervention(text: str) -> Intervention | None:
    """``NAME:key=value[,…]`` -> the intervention's parameters (``"none"`` -> None); a one-line
    PosymError on a bad name, key or value. ``temperature`` keys: beta (required, in [0, 1000]),
    n_train (default 17), floor (``1``, the default: s ≥ 1; ``0``: unfloored; log form only), form,
    layers (``0+2``); ``rope-base``: theta (in [1e-30, 1e30]); ``ntk``: kappa (in [1, 1e30]);
    ``interpolate``: factor (in [1, 1e6], fixed) or n_train (dynamic); ``freq-mask``: keep (IDs joined
    by '+', checked against the model when applied; ``none`` keeps none, an empty value is refused), layers. A string is read as
    written today: for a table's string from before the floor, see :func:`legacy_temperature`."""
    name, _, rest = str(text).partition(":")
    name = name.strip()
    if name not in NAMES:
        raise PosymError(f"unknown intervention {name!r} in {text!r}; known: {', '.join(NAMES)}")
    kv: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or key.strip() in kv:
            raise PosymError(f"{text!r}: {item!r} is not a new key=value; write e.g. temperature:beta=1,n_train=17")
        kv[key.strip()] = value.strip()
    allowed = KEYS[name]
    bad = sorted(set(kv) - set(allowed))
    if bad:
        raise PosymError(f"{text!r}: unknown key(s) {', '.join(bad)}; {name} takes {', '.join(allowed)}")
    if name == NONE:
        return None
    if name == "interpolate":
        return check_interpolate(kv.get("factor"), kv.get("n_train"))
    if name == "freq-mask":
        if "keep" not in kv:
            raise PosymError(f"{text!r}: freq-mask needs keep, e.g. freq-mask:keep=1+2+3 (frequency IDs, 1 = fastest)")
        try:
            keep = () if kv["keep"] == KEEP_NONE else tuple(sorted({int(x) for x in kv["keep"].split("+")}))
            layers = tuple(int(x) for x in kv["layers"].split("+")) if "layers" in kv else None
        except ValueError:
            raise PosymError(f"{text!r}: keep and layers must be integers joined by '+', e.g. keep=1+2 "
                             f"(keep={KEEP_NONE} drops every frequency: all rotary logits 0)") from None
        if any(k < 1 for k in keep):
            raise PosymError(f"{text!r}: frequency IDs start at 1 (the fastest)")
        return FreqMask(keep, layers)
    if name != "temperature":
        key = allowed[0]
        if key not in kv:
            raise PosymError(f"{text!r}: {name} needs {key}, e.g. {name}:{key}={'4' if key == 'kappa' else '20000'}")
        if name == "ntk":
            return RopeBase(kappa=check_kappa(kv[key]))
        return RopeBase(theta=check_theta(kv[key]))
    if "beta" not in kv:
        raise PosymError(f"{text!r}: temperature needs beta, e.g. temperature:beta=1")
    try:
        n_train = int(kv.get("n_train", DEFAULT_N_TRAIN))
        layers = tuple(int(x) for x in kv["layers"].split("+")) if "layers" in kv else None
    except ValueError:
        raise PosymError(f"{text!r}: n_train and layers must be integers (layers joined by '+', e.g. layers=0+2)") from None
    beta, n_train, form = check_temperature(kv["beta"], n_train, kv.get("form", FORMS[0]))
    if "floor" in kv and form != "log":
        raise PosymError(f"{text!r}: floor applies to the log form only (form={form} is never floored); drop floor=")
    if kv.get("floor", "1") not in ("0", "1"):
        raise PosymError(f"{text!r}: floor must be 1 (s(n) = max(1, 1 + beta*ln(n/n_train)), the default) "
                         "or 0 (unfloored)")
    return Temperature(beta, n_train, form, layers, kv.get("floor", "1") == "1")


def legacy_temperature(text: str) -> str:
    """The canonical string today of a table's intervention string written before the temperature
    floor existed: a log-form ``temperature:`` string without ``floor=`` was measured unfloored, so it
    reads ``…,floor=0``; any other string is returned unchanged (not parsed)."""
    name, _, rest = str(text).partition(":")
    keys = {item.partition("=")[0].strip() for item in rest.split(",")}
    if name.strip() != "temperature" or "floor" in keys or "form" in keys:
        return text
    spec = parse_intervention(text)
    return describe(Temperature(spec.beta, spec.n_train, spec.form, spec.layers, False))


__all__ = ["NAMES", "NONE", "DEFAULT_N_TRAIN", "Intervention", "describe", "parse_intervention", "legacy_temperature"]
