import type { Context, ContextManager } from '@opentelemetry/api';

/** Options of {@link create} and {@link register}. */
export interface Options {
  /**
   * Span attributes copied into each span's record, in this order after the
   * local root span's id (record key index 0). Default `['http.route']`.
   * At most 255 names, unique.
   */
  attributes?: string[];
  /**
   * Publish the OTEP 4719 process context (schema, key map, resource).
   * Default true. With false, publish `processContextAttributes` yourself.
   */
  processContext?: boolean;
  /** service.name until the first span shows the SDK's resource. */
  serviceName?: string;
  /** Where the one line saying why the bridge is off goes (default console.warn). */
  logger?: (message: string) => void;
  /** register(): the provider to attach to (default: the global one). */
  tracerProvider?: unknown;
}

/** A span processor of the SDK 2.x (onStart, onEnd, forceFlush, shutdown). */
export interface ThreadContextSpanProcessor {
  onStart(span: unknown, parentContext: Context): void;
  onEnd(span: unknown): void;
  forceFlush(): Promise<void>;
  shutdown(): Promise<void>;
}

/** The SDK's AsyncLocalStorageContextManager that also enters span records. */
export interface ThreadContextManager extends ContextManager {
  attach?(context: Context): { dispose(): void };
}

export interface ThreadContextBridge {
  /** False where the writer cannot publish (see reason); then it does nothing. */
  readonly enabled: boolean;
  readonly reason: string | undefined;
  readonly attributes: readonly string[];
  /** Record key index i names keyMap[i]: the local root span id, then attributes. */
  readonly keyMap: readonly string[];
  readonly contextManager: ThreadContextManager;
  readonly spanProcessor: ThreadContextSpanProcessor;
  /** The threadlocal.* process-context attributes of these records. */
  readonly processContextAttributes:
    | { readonly 'threadlocal.schema_version': 'nodejs_v1_dev'; readonly 'threadlocal.attribute_key_map': readonly string[] }
    | undefined;
}

/** A bridge to wire explicitly: its contextManager and spanProcessor (first). */
export function create(options?: Options): ThreadContextBridge;
/** The one line: after the SDK started, install a bridge in it. */
export function register(options?: Options): ThreadContextBridge;
export const DEFAULT_ATTRIBUTES: readonly string[];
export const LOCAL_ROOT_KEY: 'datadog.local_root_span_id';
export const VERSION: string;
