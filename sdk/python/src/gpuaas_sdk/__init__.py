"""gpuaas-sdk: the Python client of the gpuaas app platform."""

from .client import Client, Event, RuntimeEvent, UsageEvent
from .credentials import KeyFile, ServiceAccountCredentials, StaticToken, sign_assertion
from .errors import (AuthenticationError, Conflict, GpuaasError, InvalidRequest, NotFound, PermissionDenied,
                     PreconditionFailed, RateLimited, ServerError, Unavailable)
from .usage import UsageReporter

__all__ = ["Client", "Event", "RuntimeEvent", "UsageEvent", "KeyFile", "ServiceAccountCredentials", "StaticToken", "sign_assertion",
           "GpuaasError", "InvalidRequest", "AuthenticationError", "PermissionDenied", "NotFound", "Conflict",
           "PreconditionFailed", "RateLimited", "Unavailable", "ServerError", "UsageReporter"]
__version__ = "0.1.0"
