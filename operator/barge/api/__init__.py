"""Typed models of Barge's custom resources: the source of `crds/*.yaml` and of manifest parsing."""

from barge.api.batchjob import LLMBatchJob, LLMBatchJobSpec, LLMBatchJobStatus
from barge.api.pool import InferencePool, InferencePoolSpec, InferencePoolStatus
from barge.api.schedule import LLMBatchSchedule, LLMBatchScheduleSpec, LLMBatchScheduleStatus

__all__ = [
    "InferencePool",
    "InferencePoolSpec",
    "InferencePoolStatus",
    "LLMBatchJob",
    "LLMBatchJobSpec",
    "LLMBatchJobStatus",
    "LLMBatchSchedule",
    "LLMBatchScheduleSpec",
    "LLMBatchScheduleStatus",
]
