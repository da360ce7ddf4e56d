import { describe, expect, it } from 'vitest';
import { ChatStore, STORAGE_KEY, toMessages, type StreamFn } from './stores/chat.svelte';
import { emptyReply } from './api/chat';
import type { ChatRequest } from './api/types';
import { MAX_IMAGES, MAX_IMAGE_BYTES, imageFiles, readImages, urlBytes } from './images';

const PNG = 'data:image/png;base64,iVBORw0KGgo=';

function file(name: string, type: string, bytes = 4): File {
  return new File([new Uint8Array(bytes)], name, { type });
}

describe('readImages', () => {
  it('reads images as data: URLs and says why others are refused', async () => {
    const r = await readImages(
      [file('a.png', 'image/png'), file('b.svg', 'image/svg+xml'), file('big.jpg', 'image/jpeg', MAX_IMAGE_BYTES + 1)],
      [],
    );
    expect(r.images.map((i) => i.name)).toEqual(['a.png']);
    expect(r.images[0].url).toBe('data:image/png;base64,AAAAAA==');
    expect(r.refused).toEqual(['b.svg is not a PNG, JPEG, WebP or GIF image', 'big.jpg is larger than 8 MB']);
  });

  it("counts the conversation's images against the server's bounds", async () => {
    const have = Array.from({ length: MAX_IMAGES - 1 }, () => PNG);
    const r = await readImages([file('a.png', 'image/png'), file('b.png', 'image/png')], have);
    expect(r.images.map((i) => i.name)).toEqual(['a.png']);
    expect(r.refused[0]).toMatch(/^b\.png: a chat holds at most 16 images/);
    const full = await readImages([file('c.png', 'image/png', 5 << 20)], ['data:image/png;base64,' + 'A'.repeat(10 << 20)]);
    expect(full.images).toEqual([]);
  });

  it('takes only the images of a paste or a drop', () => {
    expect(imageFiles([file('a.txt', 'text/plain'), file('b.gif', 'image/gif')]).map((f) => f.name)).toEqual(['b.gif']);
    expect(imageFiles(null)).toEqual([]);
    expect(urlBytes('data:image/png;base64,AAAA')).toBe(3);
  });
});

describe('images in the chat', () => {
  it('sends a turn\'s images as image_url parts before its text', () => {
    expect(toMessages([{ role: 'user', content: 'what is this?', images: [PNG] }])).toEqual([
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: PNG } },
          { type: 'text', text: 'what is this?' },
        ],
      },
    ]);
  });

  it('sends an image alone, and keeps the conversation without images when storage is full', async () => {
    const seen: ChatRequest[] = [];
    const stream: StreamFn = async (req) => {
      seen.push(req);
      return { ...emptyReply(), content: 'a cat', finish: 'stop' };
    };
    const data = new Map<string, string>();
    const storage = {
      getItem: (k: string) => data.get(k) ?? null,
      setItem: (k: string, v: string) => {
        if (v.includes('data:image')) throw new DOMException('full', 'QuotaExceededError');
        data.set(k, v);
      },
    };
    const chat = new ChatStore({ storage, stream, count: async () => 0 });
    await chat.send('  ', { model: 'm', thinking: false, preset: 'instruct' }, [PNG]);
    expect(seen[0].messages[0].content).toEqual([
      { type: 'image_url', image_url: { url: PNG } },
      { type: 'text', text: '' },
    ]);
    expect(chat.current?.title).toBe('1 image');
    expect(chat.current?.turns[0].images).toEqual([PNG]);
    const kept = JSON.parse(data.get(STORAGE_KEY) ?? '[]');
    expect(kept[0].turns.map((t: { content: string }) => t.content)).toEqual(['', 'a cat']);
    expect(kept[0].turns[0].images).toBeUndefined();
  });
});
