"""`gradtui serve`: the gradtui UI in a browser.

textual-serve serves a page whose terminal (xterm.js) talks over a websocket to one process
per tab; here that process is a client of a running agent (`python -m gradtui.serve.tab`,
`gradtui attach`'s UI), never the training process itself. The page and the websocket need
the serve token (a random one unless given); the agent's own token stays in its runtime file,
read by each tab process. Modules: `cli` (the command line and the serving loop), `web` (the
aiohttp app: routes, the token guard, the tab processes), `agents` (which agent a tab attaches
to), `tab` (the tab's client process).
"""
