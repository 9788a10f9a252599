import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { childOf, elementsOf, parseXml, textOf } from '../../src/discovery/index.js';
import { hasCode } from '../../src/errors/index.js';

void test('xml: declaration, DOCTYPE, comments, attributes, entities and self-closing elements', () => {
  const doc = parseXml(
    '\ufeff<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<!-- c -->' +
      '<nvidia_smi_log><gpu id="00000000:01:00.0" note=\'a &amp; b\'><name>A &lt;b&gt; &quot;c&quot; &apos;d&apos; &#65;&#x42;</name>' +
      '<processes /><empty></empty><!-- inner --><raw><![CDATA[<x>&amp;]]></raw></gpu></nvidia_smi_log>\n',
  );
  assert.equal(doc.name, 'nvidia_smi_log');
  const gpu = childOf(doc, 'gpu');
  assert.deepEqual(gpu?.attributes, { id: '00000000:01:00.0', note: 'a & b' });
  assert.equal(textOf(childOf(gpu, 'name')), 'A <b> "c" \'d\' AB');
  assert.deepEqual(childOf(gpu, 'processes')?.children, []);
  assert.equal(textOf(childOf(gpu, 'empty')), '');
  assert.equal(textOf(childOf(gpu, 'raw')), '<x>&amp;');
  assert.equal(elementsOf(doc).length, 1);
});

void test('xml: text beside elements is kept, so "None" in mig_devices is seen as text', () => {
  const doc = parseXml('<r><mig_devices>\n\t\t\tNone\n\t\t</mig_devices></r>');
  const md = childOf(doc, 'mig_devices');
  assert.equal(textOf(md), 'None');
  assert.equal(elementsOf(md ?? doc).length, 0);
});

void test('xml: a missing element is undefined, not an empty string', () => {
  const doc = parseXml('<r><a><b>1</b></a></r>');
  assert.equal(textOf(childOf(doc, 'a', 'b')), '1');
  assert.equal(childOf(doc, 'a', 'c'), undefined);
  assert.equal(textOf(childOf(doc, 'x', 'y')), undefined);
});

const malformed: readonly { why: string; xml: string; says: RegExp }[] = [
  { why: 'a truncated capture must not read as fewer instances', xml: '<r><gpu><uuid>x</uuid>', says: /<gpu> is not closed/ },
  { why: 'mismatched close tags mean corruption', xml: '<r><a></b></r>', says: /does not match <a>/ },
  { why: 'a stray close tag', xml: '<r></r></r>', says: /no open element|second root|outside/ },
  { why: 'two documents concatenated are not one', xml: '<r></r><r></r>', says: /second root/ },
  { why: 'text after the root is not XML', xml: '<r></r>junk', says: /outside the root/ },
  { why: 'an unknown entity is not guessed', xml: '<r>&nbsp;</r>', says: /unknown entity/ },
  { why: 'an unterminated entity', xml: '<r>a & b</r>', says: /not terminated/ },
  { why: 'unquoted attributes', xml: '<r a=1></r>', says: /not quoted/ },
  { why: 'a repeated attribute', xml: '<r a="1" a="2"></r>', says: /repeated/ },
  { why: 'an internal DTD subset could define entities', xml: '<!DOCTYPE r [<!ENTITY x "y">]><r/>', says: /internal subset/ },
  { why: 'an unclosed comment', xml: '<r><!-- x</r>', says: /comment is not closed/ },
  { why: 'an empty document', xml: '  \n', says: /no root element/ },
  { why: 'a character reference out of range', xml: '<r>&#x110000;</r>', says: /out of range/ },
];
for (const m of malformed) {
  void test(`xml: refused: ${m.why}`, () => {
    assert.throws(
      () => parseXml(m.xml),
      (e: unknown) => hasCode(e, 'LLMGW_XML') && m.says.test(e.message),
    );
  });
}

void test('xml: errors name the line', () => {
  assert.throws(() => parseXml('<r>\n<a>\n</b></r>'), /line 3/);
});
