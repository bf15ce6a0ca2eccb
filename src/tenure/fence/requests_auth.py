"""`RequestsAuth`: a requests session sends a lease's token to a fenced service."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._clients import Stamping, stale

if TYPE_CHECKING:
    import requests

__all__ = ["RequestsAuth"]


class RequestsAuth(Stamping):
    """Sends ``lease``'s token (and ``resource``, unless the service names it) with each
    request, and raises ``tenure.StaleToken`` when the fence answers 409 stale::

        requests.post(url, json=order, auth=RequestsAuth(lease, "orders"))
        session.auth = RequestsAuth(lease, "orders")

    ``lease`` is a ``tenure.Lease`` (its token is read at each request) or an int. Any other
    response, the app's own 409s included, is returned as it is.
    """

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        """Stamp the request, and check its response when it comes (a response hook)."""
        request.headers.update(self.sent())
        request.register_hook("response", _raise_if_stale)
        return request


def _raise_if_stale(response: requests.Response, *args: Any, **kwargs: Any) -> None:
    if response.status_code == 409:
        refusal = stale(409, response.content)
        if refusal is not None:
            raise refusal
