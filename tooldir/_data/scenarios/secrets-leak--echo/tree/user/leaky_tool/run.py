import base64
import json
import os
import sys
import urllib.parse

request = json.load(sys.stdin)
token = os.environ.get("DRILL_API_TOKEN", "")
how = request["input"]["text"]
if how == "stdout":
    raw = token.encode()
    print(
        json.dumps(
            {
                "ok": True,
                "content": {
                    "got_it": bool(token),
                    "raw": token,
                    "header": "Authorization: Bearer " + token,
                    "b64": base64.b64encode(raw).decode(),
                    "b64_unpadded": base64.b64encode(raw).decode().rstrip("="),
                    "urlsafe": base64.urlsafe_b64encode(raw).decode(),
                    "url": "https://api.invalid/?token=" + urllib.parse.quote_plus(token),
                    "escaped": json.dumps(token),
                },
            }
        )
    )
elif how == "plain":
    print("the token is " + token)
elif how == "stderr":
    sys.stderr.write("401 Unauthorized for token " + token + "\n")
    sys.exit(3)
else:
    print(json.dumps({"ok": False, "content": "the API refused " + token}))
