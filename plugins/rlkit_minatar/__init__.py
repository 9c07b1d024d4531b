"""The ``minatar`` environment family: MinAtar's 10x10 games (Young & Tian 2019) as gymnasium ids
``MinAtar/<Game>-v0`` (all 6 actions) and ``MinAtar/<Game>-v1`` (the game's minimal action set),
for Asterix, Breakout, Freeway, Seaquest and SpaceInvaders. Observations are 10 x 10 x C booleans,
channel last (``model.kind: minatar_cnn`` reads them as they are).

Importing ``minatar`` loads matplotlib and seaborn (its display code), about 1.5 s: it happens in
:func:`register`, only for runs whose env id starts with ``MinAtar/``. MinAtar is an optional extra
(``pip install -e '.[minatar]'`` in a checkout, or ``pip install minatar``): its package requires
scipy, and with scipy installed every run, MinAtar or not, imports ``scipy.signal`` at start-up
(torchmetrics does, through Lightning)."""

from __future__ import annotations

from rlkit.api import EnvFamilySpec, UserError, hookimpl


def register() -> None:
    try:
        import minatar.gym
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "minatar":
            raise
        raise UserError("env.id: MinAtar games need the minatar package, an optional extra: "
                        "pip install minatar (in a checkout: pip install -e '.[minatar]')") from None

    minatar.gym.register_envs()


@hookimpl
def rlkit_env_families():
    return [EnvFamilySpec(name="minatar", prefixes=("MinAtar/",), register=register,
                          summary="MinAtar's 10x10 Asterix, Breakout, Freeway, Seaquest, SpaceInvaders (pip install minatar)")]
