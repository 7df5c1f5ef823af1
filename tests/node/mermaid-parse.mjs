// node mermaid-parse.mjs FILE...: parses every ```mermaid block of Markdown
// files with Mermaid's own parser (the package GitHub's renderer is built
// on), in a DOM of jsdom, offline. Prints FILE:LINE: ok or the parser's
// message per block; exits 1 when a block does not parse or a file has
// none, 2 on bad use.
import fs from 'node:fs';
import { JSDOM } from 'jsdom';

const files = process.argv.slice(2);
if (files.length === 0) {
	console.error('usage: node mermaid-parse.mjs file...');
	process.exit(2);
}
const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const mermaid = (await import('mermaid')).default;
let faults = 0;
for (const file of files) {
	const lines = fs.readFileSync(file, 'utf8').split('\n');
	let blocks = 0;
	for (let i = 0; i < lines.length; i++) {
		if (lines[i] !== '```mermaid')
			continue;
		const end = lines.indexOf('```', i + 1);
		if (end < 0) {
			console.log(`${file}:${i + 1}: a block without its closing fence`);
			faults++;
			break;
		}
		blocks++;
		try {
			const r = await mermaid.parse(lines.slice(i + 1, end).join('\n') + '\n');
			console.log(`${file}:${i + 2}: ok, ${r.diagramType}`);
		} catch (e) {
			console.log(`${file}:${i + 2}: ${String(e.message).split('\n').join(' ')}`);
			faults++;
		}
		i = end;
	}
	if (blocks === 0) {
		console.log(`${file}: no mermaid block`);
		faults++;
	}
}
process.exit(faults > 0 ? 1 : 0);
