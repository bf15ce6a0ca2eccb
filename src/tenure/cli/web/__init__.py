"""``tenure serve``'s web side: the state it reads (`state`), the ASGI app (`app`) and the page
(``static/``). Needs the ``serve`` extra (Starlette, uvicorn)."""
