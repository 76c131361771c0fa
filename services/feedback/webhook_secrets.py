"""Webhook signing secrets (issue 24): made, shown once, stored encrypted.

A Standard Webhooks secret is `whsec_` + base64 of 24 random bytes (the spec's recommended 24–64 bytes).
Signing needs the secret itself, so it cannot be stored as a hash: it is encrypted with Fernet (AES-128-CBC
+ HMAC-SHA256, the `cryptography` package) under AGENTFEEDBACK_FEEDBACK_WEBHOOK_KEY, and a database dump
alone does not reveal it. With no key configured one is derived from the HS256 dev secret (embedded / dev
deployments, where every replica shares that secret); production sets the key, the same on every replica.
"""
from __future__ import annotations

import base64
import hashlib
import secrets

from cryptography.fernet import Fernet, InvalidToken

PREFIX = "whsec_"
SECRET_BYTES = 24


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def derived_key(dev_secret: str) -> str:
    """A Fernet key derived from the HS256 dev secret (only when no key is configured)."""
    digest = hashlib.sha256(b"agentfeedback webhook secrets\0" + dev_secret.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()


class SecretBox:
    """Encrypts and decrypts subscription secrets with one Fernet key (44 URL-safe base64 characters).
    ValueError at construction for a key that is not one (the settings check names the variable)."""

    def __init__(self, key: str):
        self._fernet = Fernet(key.encode())

    def seal(self, secret: str) -> bytes:
        return self._fernet.encrypt(secret.encode())

    def open(self, sealed: bytes) -> str:
        """The clear secret; ValueError when it was sealed under another key (a replica misconfigured)."""
        try:
            return self._fernet.decrypt(sealed).decode()
        except InvalidToken:
            raise ValueError("a webhook secret was encrypted under another AGENTFEEDBACK_FEEDBACK_WEBHOOK_KEY") from None
