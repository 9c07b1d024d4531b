"""Layer 2, config: the recipe schema (dataclasses), loading and validating recipes, the per-run ``Run``.

The bundled YAML recipes live in the checkout's top-level ``recipes/`` and ship in the wheel as
package data (``bundled/``, a link to that folder)."""
