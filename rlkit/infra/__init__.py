"""Layer 1, infra: process handling, start-up memory, the two error types. Imports nothing of rlkit."""
