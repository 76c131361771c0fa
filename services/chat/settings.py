"""Chat gateway settings (prefix `AGENTFEEDBACK_CHAT_`), validated once at start-up."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from services.common.settings import LISTEN_PATTERN, TARGET_PATTERN, CommonSettings


class ChatSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_CHAT_", extra="ignore")

    # Listen address of ChatService (docs/architecture.md "Processes": 50051).
    listen: str = Field(default="127.0.0.1:50051", pattern=LISTEN_PATTERN)
    # Prometheus metrics endpoint (`host:port`, port 0 = any free port; empty = none): GET /metrics.
    metrics_listen: str = Field(default="127.0.0.1:9461", pattern=r"^$|" + LISTEN_PATTERN)
    # Address of the agent's AgentService.
    agent_target: str = Field(default="127.0.0.1:50054", pattern=TARGET_PATTERN)
    # Address of FeedbackService (ForkConversation copies the caller's ratings there: CopyRatings; DeleteTurn and
    # ClearMessages tell it which turns went: NoteTurnsRemoved, from the removal outbox).
    feedback_target: str = Field(default="127.0.0.1:50052", pattern=TARGET_PATTERN)
    # Longest user message, in Unicode code points.
    max_content_chars: int = Field(default=32000, ge=1)
    # Cap on the agent call's deadline in seconds, also used when the caller sent none.
    agent_timeout_cap_s: float = Field(default=120.0, gt=0)
    # Messages of history sent to the agent with each turn.
    history_messages: int = Field(default=20, ge=0)
    # Seconds past agent_timeout_cap_s after which a RUNNING turn is taken to have lost its process (killed
    # mid-turn): a retry with its request_id then runs it again (services/chat/turn.py STALE_MARGIN_S).
    turn_stale_margin_s: float = Field(default=60.0, gt=0)
    # Bearer token of this service's own credential (scope `feedback:turn-removal`) for
    # FeedbackService.NoteTurnsRemoved. Empty: minted from the HS256 secret as `svc:chat` (embedded / dev
    # deployments); under RS256/JWKS it must be set, else removals wait in the outbox (logged).
    feedback_token: SecretStr = SecretStr("")
    # Seconds between looks at the removal outbox for removals not yet acknowledged by the feedback
    # service (services/chat/removal.py RemovalRelay); a failed send waits 1 s × 2^(attempts−1), at most 60 s.
    removal_relay_poll_s: float = Field(default=1.0, gt=0)
    # TEST HOOK ONLY (tests/integration/test_turn_removal_outbox.py): exit the process right after a
    # DeleteTurn / ClearMessages transaction committed, before the feedback service is told (a SIGKILL at
    # the worst point). Never set in a deployment.
    test_exit_after_removal_commit: bool = False
