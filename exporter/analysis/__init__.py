"""Judgement over state: findings, the non-speculative baseline and the break-even model."""
