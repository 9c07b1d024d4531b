"""Layer 3, hooks: the plugin contract. The hookspecs, the plugin manager, the records plugins
register with, the learner layouts, and the protocols a plugin sees (``Learner``, ``RolloutSource``)."""
