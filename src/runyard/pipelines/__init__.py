"""Pipelines in code (``from runyard import Pipeline``): see :mod:`runyard.pipelines.build`."""

from __future__ import annotations

from runyard.pipelines.build import ParamRef, Pipeline, StepRef

__all__ = ["ParamRef", "Pipeline", "StepRef"]
