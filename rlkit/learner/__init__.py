"""Layer 4, learner: one actor-critic learner. The LightningModule, models, envs, rollouts, the
A2C math (pure functions), optimizers, random streams. Knows hooks only through the manager it is given."""
