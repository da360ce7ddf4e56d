// Images attached in the chat window: which files are taken, read as the
// data: URLs the chat API takes (the server fetches no URL itself).

/**
 * The server's bounds (internal/api/images.go): the images a request holds,
 * the bytes of one and of all. A request carries the whole conversation, so
 * its earlier images count too.
 */
export const MAX_IMAGES = 16;
export const MAX_IMAGE_BYTES = 8 << 20;
export const MAX_IMAGES_BYTES = 12 << 20;
/** The formats the server decodes. */
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp', 'image/gif'];

/** An image in the composer. */
export interface Attached {
  name: string;
  url: string;
}

/** What reading some files gave: the images taken, and why any were not. */
export interface ReadResult {
  images: Attached[];
  refused: string[];
}

function dataURL(f: Blob): Promise<string> {
  return new Promise((ok, fail) => {
    const r = new FileReader();
    r.onload = () => ok(String(r.result));
    r.onerror = () => fail(r.error);
    r.readAsDataURL(f);
  });
}

/** The image files among files, as a paste or a drop hands them over. */
export function imageFiles(files: Iterable<File> | null | undefined): File[] {
  return [...(files ?? [])].filter((f) => f.type.startsWith('image/'));
}

/** The bytes of the file a data: URL holds (base64: 3 bytes in 4 characters). */
export function urlBytes(url: string): number {
  return Math.floor(((url.length - url.indexOf(',') - 1) * 3) / 4);
}

/**
 * Reads files as images to attach beside those the conversation and the
 * composer already hold (`have`, data: URLs): each in a format the server
 * decodes and within the server's bounds.
 */
export async function readImages(files: File[], have: string[]): Promise<ReadResult> {
  const out: ReadResult = { images: [], refused: [] };
  let count = have.length;
  let bytes = have.reduce((n, u) => n + urlBytes(u), 0);
  for (const f of files) {
    const name = f.name || 'pasted image';
    if (!IMAGE_TYPES.includes(f.type)) {
      out.refused.push(`${name} is not a PNG, JPEG, WebP or GIF image`);
    } else if (f.size > MAX_IMAGE_BYTES) {
      out.refused.push(`${name} is larger than ${MAX_IMAGE_BYTES >> 20} MB`);
    } else if (count >= MAX_IMAGES || bytes + f.size > MAX_IMAGES_BYTES) {
      out.refused.push(
        `${name}: a chat holds at most ${MAX_IMAGES} images of ${MAX_IMAGES_BYTES >> 20} MB in all; start a new chat for more`,
      );
    } else {
      out.images.push({ name, url: await dataURL(f) });
      count++;
      bytes += f.size;
    }
  }
  return out;
}
