// render.mjs writes links.json: the links that Markdown renderers and linkifiers make of each text of
// texts.json. Run it where node and these packages are installed (npm install markdown-it@15
// linkify-it@5 micromark@4 micromark-extension-gfm@3 marked@18), then: node render.mjs
import fs from 'node:fs';
import MarkdownIt from 'markdown-it';
import LinkifyIt from 'linkify-it';
import { micromark } from 'micromark';
import { gfm, gfmHtml } from 'micromark-extension-gfm';
import { marked } from 'marked';

const version = (p) => JSON.parse(fs.readFileSync(`node_modules/${p}/package.json`)).version;
const hrefs = (html) => [...html.matchAll(/href="([^"]*)"/g)].map((m) => m[1]
  .replace(/&quot;/g, '"').replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&#x27;|&#39;/g, "'").replace(/&amp;/g, '&'));
const md = new MarkdownIt({ linkify: true, html: true });
const linkify = new LinkifyIt();
const readers = {
  [`markdown-it ${version('markdown-it')} (linkify, html)`]: (t) => hrefs(md.render(t)),
  [`linkify-it ${version('linkify-it')}`]: (t) => (linkify.match(t) || []).map((m) => m.url),
  [`micromark ${version('micromark')} + gfm ${version('micromark-extension-gfm')}`]: (t) =>
    hrefs(micromark(t, { allowDangerousHtml: true, extensions: [gfm()], htmlExtensions: [gfmHtml()] })),
  [`marked ${version('marked')} (gfm)`]: (t) => hrefs(marked.parse(t, { gfm: true })),
};
const texts = JSON.parse(fs.readFileSync('texts.json'));
const out = texts.map((text) => ({ text, links: Object.fromEntries(Object.entries(readers).map(([n, f]) => [n, f(text)])) }));
fs.writeFileSync('links.json', JSON.stringify(out, null, 1) + '\n');
