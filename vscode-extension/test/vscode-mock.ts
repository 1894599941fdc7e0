/**
 * A stand-in for the `vscode` module: enough of the API for the extension and vscode-languageclient to run in plain
 * node, with handles (`mock`) for tests to set settings, open documents and read what the extension showed.
 * Providers the client registers are accepted and ignored; this is not an editor.
 */

import * as path from "node:path";
import { EventEmitter as NodeEvents } from "node:events";

type Listener<T> = (event: T) => unknown;

export class Disposable {
    static from(...items: { dispose(): unknown }[]): Disposable {
        return new Disposable(() => items.forEach((item) => item.dispose()));
    }
    constructor(private readonly callOnDispose: () => unknown) {}
    dispose(): void {
        this.callOnDispose();
    }
}

export class EventEmitter<T> {
    private listeners = new Set<Listener<T>>();
    readonly event = (listener: Listener<T>, thisArg?: unknown, disposables?: Disposable[]): Disposable => {
        const bound: Listener<T> = (e) => listener.call(thisArg, e);
        this.listeners.add(bound);
        const disposable = new Disposable(() => this.listeners.delete(bound));
        disposables?.push(disposable);
        return disposable;
    };
    fire(event: T): void {
        for (const listener of [...this.listeners]) {
            listener(event);
        }
    }
    dispose(): void {
        this.listeners.clear();
    }
}

export class Uri {
    private constructor(
        readonly scheme: string,
        readonly authority: string,
        readonly path: string,
        readonly query = "",
        readonly fragment = "",
    ) {}
    static file(fsPath: string): Uri {
        return new Uri("file", "", path.resolve(fsPath));
    }
    static parse(value: string): Uri {
        const url = new URL(value);
        return new Uri(url.protocol.replace(/:$/, ""), url.host, decodeURIComponent(url.pathname));
    }
    static joinPath(base: Uri, ...segments: string[]): Uri {
        return new Uri(base.scheme, base.authority, path.posix.join(base.path, ...segments));
    }
    get fsPath(): string {
        return this.path;
    }
    with(change: { scheme?: string; path?: string }): Uri {
        return new Uri(change.scheme ?? this.scheme, this.authority, change.path ?? this.path);
    }
    toString(): string {
        const encoded = this.path.split("/").map(encodeURIComponent).join("/");
        return `${this.scheme}://${this.authority}${encoded}`;
    }
    toJSON(): unknown {
        return { scheme: this.scheme, path: this.path };
    }
}

export class Position {
    constructor(
        readonly line: number,
        readonly character: number,
    ) {}
}

export class Range {
    readonly start: Position;
    readonly end: Position;
    constructor(a: Position | number, b: Position | number, c?: number, d?: number) {
        this.start = typeof a === "number" ? new Position(a, b as number) : a;
        this.end = typeof a === "number" ? new Position(c as number, d as number) : (b as Position);
    }
}

export class Location {
    constructor(
        readonly uri: Uri,
        readonly range: Range,
    ) {}
}

export enum DiagnosticSeverity {
    Error = 0,
    Warning = 1,
    Information = 2,
    Hint = 3,
}
export enum DiagnosticTag {
    Unnecessary = 1,
    Deprecated = 2,
}
export enum LanguageStatusSeverity {
    Information = 0,
    Warning = 1,
    Error = 2,
}
export enum TextDocumentSaveReason {
    Manual = 1,
    AfterDelay = 2,
    FocusOut = 3,
}
export enum ProgressLocation {
    SourceControl = 1,
    Window = 10,
    Notification = 15,
}

export class Diagnostic {
    source?: string;
    code?: string | number | { value: string | number; target: Uri };
    tags?: DiagnosticTag[];
    relatedInformation?: DiagnosticRelatedInformation[];
    constructor(
        public range: Range,
        public message: string,
        public severity: DiagnosticSeverity = DiagnosticSeverity.Error,
    ) {}
}

export class DiagnosticRelatedInformation {
    constructor(
        readonly location: Location,
        readonly message: string,
    ) {}
}

export class MarkdownString {
    constructor(public value = "") {}
}

export class CancellationError extends Error {}

export class CancellationTokenSource {
    private emitter = new EventEmitter<void>();
    token = { isCancellationRequested: false, onCancellationRequested: this.emitter.event };
    cancel(): void {
        this.token.isCancellationRequested = true;
        this.emitter.fire();
    }
    dispose(): void {}
}

export class CodeActionKind {
    static readonly Empty = new CodeActionKind("");
    static readonly QuickFix = new CodeActionKind("quickfix");
    static readonly Refactor = new CodeActionKind("refactor");
    static readonly Source = new CodeActionKind("source");
    constructor(readonly value: string) {}
    append(part: string): CodeActionKind {
        return new CodeActionKind(this.value ? `${this.value}.${part}` : part);
    }
}

// Classes the language client extends or builds; their shape does not matter to these tests.
class Plain {
    constructor(...args: unknown[]) {
        Object.assign(this, { args });
    }
}
export class CompletionItem extends Plain {}
export class CodeLens extends Plain {}
export class DocumentLink extends Plain {}
export class CodeAction extends Plain {}
export class InlayHint extends Plain {}
export class TypeHierarchyItem extends Plain {}
export class CallHierarchyItem extends Plain {}
export class SymbolInformation extends Plain {}
export class WorkspaceEdit extends Plain {}
export class TextEdit extends Plain {}
export class RelativePattern extends Plain {}
export class TabInputText extends Plain {}
export class TabInputTextDiff extends Plain {}
export class TabInputCustom extends Plain {}

function tabInput(uri: Uri): TabInputText {
    return Object.assign(new TabInputText(uri), { uri });
}

export interface MockDocument {
    uri: Uri;
    fileName: string;
    languageId: string;
    version: number;
    isClosed: boolean;
    isDirty: boolean;
    isUntitled: boolean;
    lineCount: number;
    getText(): string;
}

export interface MockStatusItem {
    id: string;
    name?: string;
    text: string;
    detail?: string;
    busy: boolean;
    severity: LanguageStatusSeverity;
    command?: { title: string; command: string };
    dispose(): void;
}

export interface MockOutputChannel {
    name: string;
    lines: string[];
    shown: number;
}

/** A workspace configuration over dotted keys ("dice.decoding.steps"); objects are assembled from their keys. */
function configuration(values: Map<string, unknown>, section: string | undefined) {
    const full = (key: string) => (section ? `${section}.${key}` : key);
    const read = (key: string): unknown => {
        if (values.has(key)) {
            return values.get(key);
        }
        const prefix = `${key}.`;
        const nested = [...values.keys()].filter((k) => k.startsWith(prefix));
        if (nested.length === 0) {
            return undefined;
        }
        const out: Record<string, unknown> = {};
        for (const k of nested) {
            const parts = k.slice(prefix.length).split(".");
            let node = out;
            for (const part of parts.slice(0, -1)) {
                node = (node[part] ??= {}) as Record<string, unknown>;
            }
            node[parts[parts.length - 1]] = values.get(k);
        }
        return out;
    };
    return {
        get<T>(key: string, fallback?: T): T | undefined {
            const value = read(full(key));
            return value === undefined ? fallback : (value as T);
        },
        has(key: string): boolean {
            return read(full(key)) !== undefined;
        },
        inspect: () => undefined,
        update: async (key: string, value: unknown) => {
            mock.setSetting(full(key), value);
        },
    };
}

interface Filter {
    language?: string;
    scheme?: string;
}

function selectorMatches(selector: string | Filter | (string | Filter)[], document: MockDocument): number {
    const filters = Array.isArray(selector) ? selector : [selector];
    return filters.some((filter) =>
        typeof filter === "string"
            ? filter === document.languageId
            : (filter.language === undefined || filter.language === document.languageId) &&
              (filter.scheme === undefined || filter.scheme === document.uri.scheme),
    )
        ? 10
        : 0;
}

const events = {
    configuration: new EventEmitter<{ affectsConfiguration(section: string): boolean }>(),
    trust: new EventEmitter<void>(),
    open: new EventEmitter<MockDocument>(),
    close: new EventEmitter<MockDocument>(),
    activeEditor: new EventEmitter<{ document: MockDocument } | undefined>(),
    tabs: new EventEmitter<{ opened: unknown[]; closed: unknown[]; changed: unknown[] }>(),
};

/** Every `on*` event the tests do not drive: subscribing works, nothing ever fires. */
function quietEvents<T extends object>(target: T): T {
    return new Proxy(target, {
        get(object, key, receiver) {
            if (typeof key === "string" && !(key in object)) {
                if (key.startsWith("onDid") || key.startsWith("onWill")) {
                    return new EventEmitter<unknown>().event;
                }
                if (key.startsWith("register")) {
                    return () => new Disposable(() => undefined);
                }
            }
            return Reflect.get(object, key, receiver);
        },
    });
}

/** Handles for tests. */
export const mock = {
    settings: new Map<string, unknown>(),
    trusted: true,
    documents: [] as MockDocument[],
    activeDocument: undefined as MockDocument | undefined,
    workspaceFolders: undefined as { uri: Uri; name: string; index: number }[] | undefined,
    commands: new Map<string, (...args: unknown[]) => unknown>(),
    executed: [] as { command: string; args: unknown[] }[],
    messages: [] as { kind: "error" | "warning" | "info"; text: string; items: string[] }[],
    /** What the next message box answers: the first of `answers` while there are any, else `answer`. */
    answer: undefined as string | undefined,
    answers: [] as string[],
    /** Each progress notification: its title, what it reported, and whether it was cancellable. */
    progress: [] as { title?: string; cancellable?: boolean; messages: string[] }[],
    statusItems: [] as MockStatusItem[],
    outputs: [] as MockOutputChannel[],
    diagnostics: new Map<string, Diagnostic[]>(),
    diagnosticEvents: new NodeEvents(),
    extensions: new Map<string, { isActive: boolean; exports: unknown; activate(): Promise<unknown> }>(),

    reset(): void {
        this.settings = new Map(defaultSettings);
        this.trusted = true;
        this.documents = [];
        this.activeDocument = undefined;
        this.commands.clear();
        this.executed = [];
        this.messages = [];
        this.answer = undefined;
        this.answers = [];
        this.progress = [];
        this.statusItems = [];
        this.outputs = [];
        this.diagnostics.clear();
        this.extensions.clear();
        this.workspaceFolders = undefined;
    },
    setSetting(key: string, value: unknown): void {
        this.settings.set(key, value);
        events.configuration.fire({
            affectsConfiguration: (section: string) => key === section || key.startsWith(`${section}.`),
        });
    },
    grantTrust(): void {
        this.trusted = true;
        events.trust.fire();
    },
    openDocument(fsPath: string, text: string, languageId = "python"): MockDocument {
        const document: MockDocument = {
            uri: Uri.file(fsPath),
            fileName: path.resolve(fsPath),
            languageId,
            version: 1,
            isClosed: false,
            isDirty: false,
            isUntitled: false,
            lineCount: text.split("\n").length,
            getText: () => text,
        };
        this.documents.push(document);
        events.tabs.fire({ opened: [{}], closed: [], changed: [] });
        events.open.fire(document);
        this.activeDocument = document;
        events.activeEditor.fire({ document });
        return document;
    },
    output(): string {
        return this.outputs.flatMap((channel) => channel.lines).join("\n");
    },
};

/** Defaults from package.json's `contributes.configuration`, as VS Code would apply them. */
const defaultSettings: Map<string, unknown> = (() => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const manifest = require(path.join(__dirname, "..", "..", "package.json")) as {
        contributes: { configuration: { properties: Record<string, { default: unknown }> } };
    };
    return new Map(Object.entries(manifest.contributes.configuration.properties).map(([k, v]) => [k, v.default]));
})();
export const version = "1.85.0";

export const env = { appName: "Visual Studio Code (mock)", language: "en", openExternal: async () => true };

export const workspace = quietEvents({
    get workspaceFolders(): { uri: Uri; name: string; index: number }[] | undefined {
        return mock.workspaceFolders;
    },
    get isTrusted(): boolean {
        return mock.trusted;
    },
    get textDocuments(): MockDocument[] {
        return mock.documents;
    },
    getConfiguration: (section?: string) => configuration(mock.settings, section),
    getWorkspaceFolder: () => undefined,
    onDidChangeConfiguration: events.configuration.event,
    onDidGrantWorkspaceTrust: events.trust.event,
    onDidOpenTextDocument: events.open.event,
    onDidCloseTextDocument: events.close.event,
    createFileSystemWatcher: () => ({
        onDidCreate: new EventEmitter().event,
        onDidChange: new EventEmitter().event,
        onDidDelete: new EventEmitter().event,
        dispose: () => undefined,
    }),
    applyEdit: async () => true,
});

function message(kind: "error" | "warning" | "info") {
    return async (text: string, ...items: unknown[]): Promise<string | undefined> => {
        mock.messages.push({ kind, text, items: items.filter((item): item is string => typeof item === "string") });
        return mock.answers.length > 0 ? mock.answers.shift() : mock.answer;
    };
}

export const window = quietEvents({
    get activeTextEditor(): { document: MockDocument } | undefined {
        return mock.activeDocument && { document: mock.activeDocument };
    },
    get visibleTextEditors(): { document: MockDocument }[] {
        return mock.activeDocument ? [{ document: mock.activeDocument }] : [];
    },
    // One tab for each open document, as VS Code opens an editor for it: a client that pulls diagnostics pulls them
    // only for documents shown in a tab
    tabGroups: {
        get all() {
            return [{ tabs: mock.documents.filter((d) => !d.isClosed).map((d) => ({ input: tabInput(d.uri) })) }];
        },
        onDidChangeTabs: events.tabs.event,
    },
    onDidChangeActiveTextEditor: events.activeEditor.event,
    showErrorMessage: message("error"),
    showWarningMessage: message("warning"),
    showInformationMessage: message("info"),
    showTextDocument: async () => undefined,
    withProgress: async <R>(
        options: { title?: string; cancellable?: boolean },
        task: (progress: { report(value: { message?: string }): void }, token: unknown) => Promise<R>,
    ) => {
        const shown = { title: options.title, cancellable: options.cancellable, messages: [] as string[] };
        mock.progress.push(shown);
        const report = (value: { message?: string }) => {
            if (value.message !== undefined) {
                shown.messages.push(value.message);
            }
        };
        return task({ report }, new CancellationTokenSource().token);
    },
    createOutputChannel(name: string) {
        const channel: MockOutputChannel = { name, lines: [], shown: 0 };
        mock.outputs.push(channel);
        const write = (level: string) => (text: string) => {
            channel.lines.push(level ? `[${level}] ${text}` : text);
            if (process.env.DICE_TEST_LOG) {
                process.stderr.write(`${name}: ${level} ${text}\n`);
            }
        };
        return {
            name,
            logLevel: 2,
            onDidChangeLogLevel: new EventEmitter<number>().event,
            append: write(""),
            appendLine: write(""),
            replace: write(""),
            trace: write("trace"),
            debug: write("debug"),
            info: write("info"),
            warn: write("warning"),
            error: (error: string | Error) => write("error")(String(error)),
            clear: () => (channel.lines.length = 0),
            show: () => (channel.shown += 1),
            hide: () => undefined,
            dispose: () => undefined,
        };
    },
});

export const languages = quietEvents({
    match: (selector: string | Filter | (string | Filter)[], document: MockDocument) => selectorMatches(selector, document),
    createLanguageStatusItem(id: string) {
        const item: MockStatusItem = {
            id,
            text: "",
            busy: false,
            severity: LanguageStatusSeverity.Information,
            dispose: () => undefined,
        };
        mock.statusItems.push(item);
        return item;
    },
    createDiagnosticCollection(name?: string) {
        const collection = {
            name,
            set(uri: Uri, diagnostics: Diagnostic[] | undefined) {
                mock.diagnostics.set(uri.toString(), diagnostics ?? []);
                mock.diagnosticEvents.emit("set", uri.toString(), diagnostics ?? []);
            },
            delete(uri: Uri) {
                mock.diagnostics.delete(uri.toString());
            },
            clear: () => mock.diagnostics.clear(),
            get: (uri: Uri) => mock.diagnostics.get(uri.toString()),
            has: (uri: Uri) => mock.diagnostics.has(uri.toString()),
            forEach: () => undefined,
            dispose: () => undefined,
        };
        return collection;
    },
});

export const commands = {
    registerCommand(id: string, handler: (...args: unknown[]) => unknown): Disposable {
        if (mock.commands.has(id)) {
            throw new Error(`command '${id}' already exists`);
        }
        mock.commands.set(id, handler);
        return new Disposable(() => mock.commands.delete(id));
    },
    async executeCommand(id: string, ...args: unknown[]): Promise<unknown> {
        mock.executed.push({ command: id, args });
        const handler = mock.commands.get(id);
        if (handler === undefined) {
            throw new Error(`command '${id}' not found`);
        }
        return handler(...args);
    },
};

export const extensions = {
    getExtension: (id: string) => mock.extensions.get(id),
};

mock.reset();
