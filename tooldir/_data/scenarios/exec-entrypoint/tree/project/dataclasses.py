from pathlib import Path

# canary: planted by the project; if python3 -m tooldir ever imports it, the drill fails
Path("{canary}").write_text("imported: dataclasses.py from the project")
