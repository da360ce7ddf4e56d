// The names people read for a served model. The server names the demo model
// by its folder, demo- and a hash of its files, which says nothing to a user.

/** The unpacked demo model's id: demo- and 16 hex digits (internal/models). */
const DEMO_ID = /^demo-[0-9a-f]{16}$/;

/** True when id names the small demo model Petal runs when no real model is installed. */
export function isDemoModel(id: string): boolean {
  return DEMO_ID.test(id);
}

/** What the server and the UI call the demo model (internal/models.DemoDisplayName). */
export const DEMO_DISPLAY_NAME = 'Demo model';

/** The name to show for a served model id: "Demo model" for the demo, else the id. */
export function displayName(id: string): string {
  return isDemoModel(id) ? DEMO_DISPLAY_NAME : id;
}
