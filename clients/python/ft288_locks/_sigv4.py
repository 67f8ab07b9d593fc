"""AWS Signature Version 4 through botocore, imported only when asked for."""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional

from .errors import SigningError, SigV4Unavailable, TransportError

SERVICE = "execute-api"


class SigV4:
    """Signs requests for API Gateway (service ``execute-api``) with botocore's
    own signer. ``credentials`` is a botocore credentials object (anything with
    ``get_frozen_credentials()``); None loads the default chain (environment,
    shared files, SSO, container and instance roles), whose refreshable
    credentials botocore renews when they near their expiry."""

    def __init__(self, region: Optional[str] = None, credentials: Any = None) -> None:
        try:
            import botocore.session
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest
        except ImportError as e:
            raise SigV4Unavailable(
                "SigV4 signing needs botocore, which is not installed: "
                "pip install 'ft288-locks[sigv4]' (or botocore); every AWS Lambda Python runtime has it"
            ) from e
        self._auth_cls = SigV4Auth
        self._request_cls = AWSRequest
        if credentials is None or not region:
            try:
                session = botocore.session.get_session()
                if credentials is None:
                    credentials = session.get_credentials()
                if not region:
                    # AWS_REGION first, as the other AWS SDKs and Lambda have
                    # it; botocore reads AWS_DEFAULT_REGION and the profile.
                    region = os.environ.get("AWS_REGION") or session.get_config_variable("region")
            except Exception as e:  # an unknown profile, an expired SSO token, ...
                raise SigningError(f"load AWS configuration: {e}") from e
        if credentials is None:
            raise SigningError(
                "no AWS credentials found (environment, shared credentials/config files, SSO, "
                "container or instance role)"
            )
        if not region:
            raise SigningError("no AWS region: pass region= or set AWS_REGION")
        if not callable(getattr(credentials, "get_frozen_credentials", None)):
            raise SigningError("credentials must be a botocore credentials object (with get_frozen_credentials())")
        self.region: str = region
        self._credentials = credentials

    def sign(self, method: str, url: str, headers: Mapping[str, str], body: Optional[bytes]) -> Dict[str, str]:
        """The headers with X-Amz-Date, Authorization and, for temporary
        credentials, X-Amz-Security-Token added."""
        try:
            frozen = self._credentials.get_frozen_credentials()
        except Exception as e:
            # Temporary as far as a lease is concerned: a refresh that fails
            # once must not end a healthy lease; renewals retry until the
            # lease's local deadline. Nothing was sent.
            raise TransportError(f"sigv4: retrieve credentials: {e}", maybe_sent=False) from e
        req = self._request_cls(method=method, url=url, headers=dict(headers), data=body or b"")
        self._auth_cls(frozen, SERVICE, self.region).add_auth(req)
        return {k: v for k, v in req.headers.items()}
