// Rewrites one REPL input so that it can `await` at its top level and still leave its top-level
// bindings behind for the next input, as Node's own REPL does: the code runs inside an async
// function, and every top-level declaration becomes an assignment to a `var` declared outside it
// (a `var` of a vm script lands on the context's global object, so it outlives the call).
//
// `const` therefore becomes reassignable and a second `let x` is a plain assignment — the same
// leniency Node's REPL has; a REPL where re-running a cell throws "already declared" is worse.
import { parse } from 'acorn';

function patternNames(node, out) {
  switch (node?.type) {
    case 'Identifier': out.push(node.name); break;
    case 'ObjectPattern':
      for (const p of node.properties) patternNames(p.type === 'RestElement' ? p.argument : p.value, out);
      break;
    case 'ArrayPattern': for (const e of node.elements) patternNames(e, out); break;
    case 'RestElement': patternNames(node.argument, out); break;
    case 'AssignmentPattern': patternNames(node.left, out); break;
    default: break;
  }
  return out;
}

// Thrown for code that does not parse; `message` reads like V8's, with the line and column.
export class ReplSyntaxError extends SyntaxError {}

export function toplevel(code) {
  let program;
  try {
    program = parse(code, {
      ecmaVersion: 'latest',
      sourceType: 'script',
      allowAwaitOutsideFunction: true,
      allowReturnOutsideFunction: true,
      allowHashBang: true,
    });
  } catch (e) {
    if (/'import' and 'export' may appear only/.test(e.message))
      throw new ReplSyntaxError('static import is not supported in the REPL; use `await import("…")`');
    throw new ReplSyntaxError(e.message);
  }
  const names = new Set();
  const hoisted = []; // function declarations run first, as hoisting would
  let body = '';
  let at = 0;
  const keep = (end) => { body += code.slice(at, end); at = end; };
  for (const stmt of program.body) {
    if (stmt.type === 'VariableDeclaration') {
      keep(stmt.start);
      const parts = [];
      for (const d of stmt.declarations) {
        patternNames(d.id, []).forEach((n) => names.add(n));
        if (d.init) parts.push(`(${code.slice(d.id.start, d.id.end)} = ${code.slice(d.init.start, d.init.end)})`);
        else if (stmt.kind !== 'var') parts.push(`(${code.slice(d.id.start, d.id.end)} = undefined)`);
      }
      body += parts.length ? `void (${parts.join(', ')});` : ';';
      at = stmt.end;
    } else if (stmt.type === 'FunctionDeclaration' && stmt.id) {
      keep(stmt.start);
      names.add(stmt.id.name);
      hoisted.push(`${stmt.id.name} = ${code.slice(stmt.start, stmt.end)};`);
      at = stmt.end;
    } else if (stmt.type === 'ClassDeclaration' && stmt.id) {
      keep(stmt.start);
      names.add(stmt.id.name);
      body += `${stmt.id.name} = ${code.slice(stmt.start, stmt.end)};`;
      at = stmt.end;
    }
  }
  keep(code.length);
  const vars = names.size ? `var ${[...names].join(', ')};\n` : '';
  // The newline before the closing brace keeps a trailing line comment from swallowing it.
  return `${vars}(async () => {${hoisted.join('')}\n${body}\n})()`;
}
