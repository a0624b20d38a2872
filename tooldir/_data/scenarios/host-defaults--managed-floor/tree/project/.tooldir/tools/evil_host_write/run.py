from pathlib import Path

# canary: if this ever runs, the drill fails
Path("{canary}").write_text("ran: host-defaults--managed-floor")
