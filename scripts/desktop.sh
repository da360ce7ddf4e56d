#!/usr/bin/env bash
# Builds the desktop app for Linux (Wails, webkit2gtk 4.1), starts it under
# Xvfb on the demo model, types a message into its window and checks that
# the model answered it; screenshots land in $DESKTOP_ARTIFACTS (default
# build/artifacts). Installs what it needs with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
pkg-config --exists webkit2gtk-4.1 2>/dev/null || need+=(libwebkit2gtk-4.1-dev libgtk-3-dev)
command -v xvfb-run >/dev/null || need+=(xvfb)
command -v xdotool >/dev/null || need+=(xdotool)
command -v import >/dev/null || need+=(imagemagick)
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

art=${DESKTOP_ARTIFACTS:-build/artifacts}
mkdir -p "$art"
art=$(cd "$art" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CGO_ENABLED=1 go build -tags desktop,production,webkit2_41 -o "$work/petal" .

# A port nobody uses, in the app's own settings.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/config/petal"
printf '{"port":%d,"preset":"instruct","thinking":false,"allowed_origins":[]}\n' "$port" >"$work/config/petal/settings.json"

cat >"$work/session.sh" <<SESSION
#!/usr/bin/env bash
set -euo pipefail
export HOME="$work" XDG_CONFIG_HOME="$work/config" XDG_CACHE_HOME="$work/cache" XDG_DATA_HOME="$work/data" PETAL_MODELS="$work/models"
export WEBKIT_DISABLE_COMPOSITING_MODE=1 LIBGL_ALWAYS_SOFTWARE=1
"$work/petal" >"$art/desktop.log" 2>&1 &
app=\$!
trap 'kill \$app 2>/dev/null; wait \$app 2>/dev/null || true' EXIT
for _ in \$(seq 60); do curl -fs -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 1; done
xdotool search --sync --name '^Petal\$' windowactivate --sync >/dev/null 2>&1 || true
sleep 5
import -window root "$art/desktop-window.png"
# The message box sits at the bottom of the window; Enter sends.
# GTK makes small helper windows with the same title: take the big one.
w=0
for id in \$(xdotool search --name '^Petal\$'); do
	eval "\$(xdotool getwindowgeometry --shell "\$id")"
	if [ "\$WIDTH" -gt "\$w" ]; then x=\$X y=\$Y w=\$WIDTH h=\$HEIGHT; fi
done
echo "window at \$x,\$y size \${w}x\$h"
xdotool mousemove \$((x + w * 2 / 3)) \$((y + h - 90)) click 1
sleep 1
xdotool type --delay 40 "Hello"
xdotool key Return
for _ in \$(seq 60); do
	done=\$(curl -fs "http://127.0.0.1:$port/metrics" | awk '/^petal_requests_completed_total/{print \$2}')
	[ "\${done:-0}" != 0 ] && break
	sleep 1
done
sleep 1
import -window root "$art/desktop-chat.png"
echo "completed=\${done:-0}"
SESSION
chmod +x "$work/session.sh"
out=$(timeout 180 xvfb-run -a -s "-screen 0 1200x800x24" "$work/session.sh")
echo "$out"
case "$out" in
*completed=0* | "") echo "the desktop window's message got no reply (see $art)"; exit 1 ;;
esac
echo "desktop app answered a message typed into its window; screenshots in $art"
