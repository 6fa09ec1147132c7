"""The engine: requests, scheduler, engine step (propose -> verify -> accept -> roll back), and
the thread-safe loop (``LLMEngine``). ``specdec.LLM`` is a thin API on top."""

from specdec.engine.core import EngineCore, EngineStats, StepTimes, StepUpdate
from specdec.engine.llm_engine import LLMEngine, StreamOutput, request_output
from specdec.engine.request import Request, RequestStatus
from specdec.engine.scheduler import ScheduledRequest, Scheduler, SchedulerOutput

__all__ = ["EngineCore", "EngineStats", "LLMEngine", "Request", "RequestStatus", "ScheduledRequest",
           "Scheduler", "SchedulerOutput", "StepTimes", "StepUpdate", "StreamOutput", "request_output"]
