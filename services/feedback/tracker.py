"""Ticket sinks for FileFeedback: a local Markdown directory (default) and GitHub REST (issues API).

`sink.file(key, title, body) -> url`. `key` is the feedback id: the Markdown sink names the file
after it, so filing the same report twice writes one file. Errors: the tracker refused the ticket
(4xx) → FailedPrecondition (reason TRACKER_REJECTED); tracker unreachable or 5xx → Unavailable.
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Protocol

import httpx

from services.common.errors import FailedPrecondition, Unavailable
from services.feedback.settings import FeedbackSettings


class TrackerSink(Protocol):
    async def file(self, key: str, title: str, body: str) -> str: ...

    async def close(self) -> None: ...


class MarkdownDirSink:
    """Writes `<directory>/<key>.md` (atomically: temp file + rename) and returns its `file://` URL."""

    def __init__(self, directory: Path, labels: tuple[str, ...] = ("feedback",)):
        self.directory = directory
        self._labels = labels

    def _write(self, key: str, title: str, body: str) -> str:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{key}.md"
        if not path.exists():
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(f"# {title}\n\nlabels: {', '.join(self._labels)}\n\n{body}", encoding="utf-8")
            tmp.replace(path)
        return path.resolve().as_uri()

    async def file(self, key: str, title: str, body: str) -> str:
        return await asyncio.to_thread(self._write, key, title, body)

    async def close(self) -> None:
        return None


class GitHubIssuesSink:
    """`POST {api}/repos/{repo}/issues` with a bearer token (GitHub REST v3); returns the issue's
    `html_url`. One httpx client per process (connection reuse), 10 s timeout."""

    def __init__(self, api: str, repo: str, token: str, timeout_s: float = 10.0,
                 labels: tuple[str, ...] = ("feedback",)):
        self._labels = labels
        if not repo or "/" not in repo:
            raise ValueError("AGENTFEEDBACK_FEEDBACK_TRACKER_GITHUB_REPO must be owner/name for the github tracker")
        self._repo = repo
        self._client = httpx.AsyncClient(
            base_url=api.rstrip("/"),
            timeout=timeout_s,
            headers={"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
                     **({"Authorization": f"Bearer {token}"} if token else {})},
        )

    async def file(self, key: str, title: str, body: str) -> str:
        try:
            r = await self._client.post(f"/repos/{self._repo}/issues",
                                        json={"title": title, "body": body, "labels": list(self._labels)})
        except httpx.HTTPError as e:
            raise Unavailable(f"issue tracker unreachable: {type(e).__name__}", reason="TRACKER_UNAVAILABLE") from None
        if r.status_code >= 500 or r.status_code == 429:
            raise Unavailable(f"issue tracker answered {r.status_code}", reason="TRACKER_UNAVAILABLE")
        if r.status_code >= 400:
            raise FailedPrecondition(f"issue tracker refused the ticket ({r.status_code})", reason="TRACKER_REJECTED")
        url = r.json().get("html_url", "")
        if not url:
            raise Unavailable("issue tracker answered without html_url", reason="TRACKER_UNAVAILABLE")
        return str(url)

    async def close(self) -> None:
        await self._client.aclose()


def make_sink(settings: FeedbackSettings) -> TrackerSink:
    """The sink `settings.tracker` names; the Markdown directory defaults to `<data_dir>/tickets`."""
    labels = tuple(x.strip() for x in settings.tracker_labels.split(",") if x.strip())
    if settings.tracker == "github":
        return GitHubIssuesSink(settings.tracker_github_api, settings.tracker_github_repo,
                               settings.tracker_github_token.get_secret_value(), labels=labels)
    return MarkdownDirSink(Path(settings.tracker_markdown_dir or Path(settings.data_dir) / "tickets"), labels)
