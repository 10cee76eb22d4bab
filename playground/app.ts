/**
 * The playground page: every tool of the service (from the API, not hard-coded), a job created with the user's own
 * files or image URLs (with a seed and several results if asked), its status and progress live from the event stream,
 * the result and a gallery of every result with its seed, and the history. Built with the typed
 * client; the API key stays in this tab's sessionStorage and is sent to this origin only.
 */
import {
  type Client,
  type GenerationType,
  type HistoryItem,
  type JobOutput,
  type Tool,
  ServiceError,
  createClient,
} from '../client/src/index.js';

const KEY_STORAGE = 'igs.apiKey';
const PAGE_SIZE = 10;

const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;
const element = <K extends keyof HTMLElementTagNameMap>(
  tag: K,
  properties: Partial<HTMLElementTagNameMap[K]> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] => {
  const node = Object.assign(document.createElement(tag), properties);
  node.append(...children);
  return node;
};

let client: Client | undefined;
let tools: Tool[] = [];
let types: GenerationType[] = [];
let page = 1;
let totalPages = 1;
/** The job being followed; a new one stops following the previous. */
let following: AbortController | undefined;
/** The history's live updates, for the key in use; another key stops them. */
let watching: AbortController | undefined;
/** The status of each item on the history page shown, to tell a change worth listing again from a progress tick. */
let shown = new Map<string, HistoryItem['status']>();

/** What a problem means to a person, from its code; the service's own detail otherwise. */
function describe(error: unknown): string {
  if (!(error instanceof ServiceError)) return error instanceof Error ? error.message : String(error);
  switch (error.code) {
    case 'unauthorized':
      return 'The API key was not accepted. Check it and enter it again.';
    case 'rate_limited':
    case 'too_many_pending':
    case 'too_many_concurrent_requests':
      return `${error.message} Try again in ${error.retryAfter ?? 60} seconds.`;
    case 'service_unavailable':
      return `The service is briefly unavailable. Try again in ${error.retryAfter ?? 5} seconds.`;
    case 'network_error':
      return 'The service could not be reached. Check your connection and try again.';
    default: {
      const fields = error.problem?.errors?.map((field) => `${field.field}: ${field.message}`).join('; ');
      return fields ? `${error.message} (${fields})` : error.message;
    }
  }
}

function notify(message: string | null): void {
  const notice = $('notice');
  notice.textContent = message ?? '';
  notice.hidden = message === null;
}

async function attempt(work: () => Promise<void>): Promise<void> {
  try {
    notify(null);
    await work();
  } catch (error) {
    if (error instanceof DOMException && error.name === 'AbortError') return;
    notify(describe(error));
  }
}

async function useKey(key: string): Promise<void> {
  sessionStorage.setItem(KEY_STORAGE, key);
  client = createClient({ baseUrl: location.origin, apiKey: key });
  tools = await client.tools();
  renderTools();
  $('job-form').hidden = false;
  $('key-needed').hidden = true;
  const allTypes = (await Promise.all(tools.map((tool) => client!.generationTypes(tool.tool)))).flat();
  $<HTMLSelectElement>('filter-type').replaceChildren(
    element('option', { value: '', textContent: 'All' }),
    ...allTypes.map((type) => element('option', { value: type.generation_type, textContent: type.title })),
  );
  watching?.abort();
  watching = new AbortController();
  void attempt(() => watchHistory(watching!.signal));
}

/**
 * Keeps the history page current from `GET /user/events`: listed each time the stream opens (the first time, and after
 * every reconnect, when a replica that shut down sent the page to another), and again when an item on it changes
 * status, a new one appears or one is deleted.
 */
async function watchHistory(signal: AbortSignal): Promise<void> {
  await client!.followHistory({
    signal,
    onOpen: loadHistory,
    onItem: (item) => {
      if (shown.get(item.history_item_id) !== item.status) void attempt(loadHistory);
    },
    onDeleted: () => void attempt(loadHistory),
  });
}

function renderTools(): void {
  // For measurements (npm run bench -- frontend, or a real-user monitor): when a person first sees the tools.
  if (performance.getEntriesByName('igs:tools-shown').length === 0) {
    requestAnimationFrame(() => performance.mark('igs:tools-shown'));
  }
  const groups = new Map<string, Tool[]>();
  for (const tool of tools) groups.set(tool.group_tool, [...(groups.get(tool.group_tool) ?? []), tool]);
  $('tools').replaceChildren(
    ...[...groups].map(([group, members]) =>
      element(
        'fieldset',
        {},
        element('legend', { textContent: group === 'default' ? 'general' : group }),
        ...members.map((tool) =>
          element(
            'label',
            {},
            element('input', { type: 'radio', name: 'tool', value: tool.tool, required: true }),
            tool.title,
          ),
        ),
      ),
    ),
  );
}

async function chooseTool(tool: string): Promise<void> {
  types = await client!.generationTypes(tool);
  $<HTMLSelectElement>('generation-type').replaceChildren(
    ...types.map((type) =>
      element('option', { value: type.generation_type, textContent: type.title, selected: type.is_default }),
    ),
  );
  renderInputs();
}

function renderInputs(): void {
  const type = types.find((candidate) => candidate.generation_type === $<HTMLSelectElement>('generation-type').value);
  if (!type) return;
  $('type-description').replaceChildren(...withCode(type.description));
  $('inputs').replaceChildren(
    ...type.inputs.map((input) => {
      const id = `input-${input.name}`;
      const hint = element('p', { id: `${id}-hint`, className: 'hint' }, ...withCode(input.description));
      const field =
        input.kind === 'image'
          ? element('input', { id, name: input.name, type: 'file', accept: 'image/jpeg,image/png,image/webp' })
          : element('textarea', {
              id,
              name: input.name,
              rows: 2,
              ...(input.max_length === undefined ? {} : { maxLength: input.max_length }),
            });
      field.required = input.required;
      field.setAttribute('aria-describedby', hint.id);
      const label = element('label', {
        htmlFor: id,
        textContent: `${input.name}${input.required ? '' : ' (optional)'}`,
      });
      if (!(field instanceof HTMLInputElement)) return element('div', { className: 'field' }, label, field, hint);
      const preview = element('img', { className: 'thumb', alt: `Preview of the ${input.name} image`, hidden: true });
      // An image URL instead of a file: the service fetches it. Either one fills the input.
      const url = element('input', {
        id: `${id}-url`,
        name: `${input.name}-url`,
        type: 'url',
        placeholder: 'https://…',
        className: 'image-url',
      });
      url.dataset.input = input.name;
      const urlLabel = element('label', {
        htmlFor: url.id,
        textContent: `${input.name} image URL (instead of a file)`,
      });
      const showPreview = (source: string | undefined) => {
        if (preview.src.startsWith('blob:')) URL.revokeObjectURL(preview.src);
        preview.hidden = !source;
        if (source) preview.src = source;
        else preview.removeAttribute('src');
      };
      field.addEventListener('change', () => {
        const file = field.files?.[0];
        if (file) url.value = '';
        url.required = input.required && !file;
        showPreview(file ? URL.createObjectURL(file) : undefined);
      });
      url.addEventListener('input', () => {
        const given = url.value.trim() !== '';
        if (given) field.value = '';
        field.required = input.required && !given;
        // No preview of a URL: the service fetches it, not this page.
        showPreview(undefined);
      });
      return element('div', { className: 'field' }, label, field, urlLabel, url, hint, preview);
    }),
  );
}

/** The catalogue's text, its `code` spans as code elements. */
function withCode(text: string): (string | HTMLElement)[] {
  return text.split('`').map((part, index) => (index % 2 === 1 ? element('code', { textContent: part }) : part));
}

async function submitJob(form: HTMLFormElement): Promise<void> {
  const data = new FormData(form);
  const files: Record<string, Blob> = {};
  for (const field of form.querySelectorAll<HTMLInputElement>('input[type=file]')) {
    const file = field.files?.[0];
    if (file) files[field.name] = file;
  }
  const urls: Record<string, string> = {};
  for (const field of form.querySelectorAll<HTMLInputElement>('input.image-url')) {
    if (field.value.trim() !== '') urls[field.dataset.input!] = field.value.trim();
  }
  const text = (name: string): string | undefined => {
    const value = data.get(name);
    return typeof value === 'string' && value !== '' ? value : undefined;
  };
  $<HTMLButtonElement>('submit').disabled = true;
  try {
    // A job takes its images one way: with any URL, the files are stored first and named by their ids.
    const images: Record<string, Blob | string> =
      Object.keys(urls).length === 0 ? files : { ...urls, ...(await storedFilesOf(files)) };
    const accepted = await client!.createJob({
      tool: text('tool') ?? '',
      generationType: text('generation_type'),
      images,
      // Every text input the form shows (the chosen type's, read from the API), each left out when empty.
      texts: Object.fromEntries(
        [...form.querySelectorAll<HTMLTextAreaElement>('#inputs textarea')].flatMap((field) => {
          const value = text(field.name);
          return value === undefined ? [] : [[field.name, value]];
        }),
      ),
      seed: text('seed') === undefined ? undefined : Number(text('seed')),
      numOutputs: Number(text('num_outputs') ?? 1),
    });
    showJob({ status: 'pending' });
    void loadHistory();
    following?.abort();
    following = new AbortController();
    const item = await client!.waitForJob(accepted.history_item_id, {
      signal: following.signal,
      onUpdate: showJob,
    });
    showJob(item);
    await loadHistory();
  } finally {
    $<HTMLButtonElement>('submit').disabled = false;
  }
}

/** Each file stored with `POST /files`, by input name, as the `file_id` a JSON job names it by. */
async function storedFilesOf(files: Record<string, Blob>): Promise<Record<string, string>> {
  const stored = await Promise.all(
    Object.entries(files).map(async ([name, file]) => [name, (await client!.uploadFile(file)).file_id] as const),
  );
  return Object.fromEntries(stored);
}

function placeInLine(position: number): string {
  if (position === 1) return 'Waiting in line: it is next.';
  const ahead = position - 1;
  return `Waiting in line: ${ahead} ${ahead === 1 ? 'job' : 'jobs'} ahead of it.`;
}

function showJob(item: Pick<HistoryItem, 'status'> & Partial<HistoryItem>): void {
  $('job').hidden = false;
  const status = $('job-status');
  const result = $('result');
  // Indeterminate (no value) until the engine reports how far it is; gone once the job has ended.
  const progress = $<HTMLProgressElement>('job-progress');
  progress.hidden = item.status !== 'pending';
  const fraction = item.progress ?? null;
  if (fraction === null) progress.removeAttribute('value');
  else progress.value = fraction;
  // While queued, its place in its engine's line; the event stream sends it again as the jobs ahead go.
  const place = $('job-place');
  const position = item.status === 'pending' ? (item.queue_position ?? null) : null;
  place.hidden = position === null;
  place.textContent = position === null ? '' : placeInLine(position);
  const gallery = $('outputs');
  gallery.hidden = true;
  if (item.status === 'pending') {
    status.textContent = 'Working on it…';
    result.hidden = true;
  } else if (item.status === 'error') {
    status.textContent = `The job failed: ${item.error?.message ?? 'no reason given'} (${item.error?.code ?? 'error'})`;
    result.hidden = true;
  } else if (item.preview_url && item.stock_url) {
    status.textContent = 'Done.';
    const image = $<HTMLImageElement>('result-image');
    image.alt = `Result of ${item.tool ?? 'the job'} (${item.generation_type ?? ''})`;
    // The small preview first, then the full image in its place once it has loaded.
    const stock = client!.mediaUrl(item.stock_url);
    image.src = client!.mediaUrl(item.preview_url);
    const full = new Image();
    full.onload = () => (image.src = stock);
    full.src = stock;
    $<HTMLAnchorElement>('download').href = stock;
    result.hidden = false;
    showOutputs(item.outputs ?? []);
  }
}

/** Every result of a complete job, each with its seed (to make it again) and its full image a click away. */
function showOutputs(outputs: readonly JobOutput[]): void {
  const gallery = $('outputs');
  gallery.replaceChildren(
    ...outputs.map((output, index) => {
      const seed = output.seed === null ? 'no seed' : `seed ${output.seed}`;
      const picture = element('img', {
        src: client!.mediaUrl(output.preview_url),
        alt: `Result ${index + 1}, ${seed}`,
      });
      const link = element('a', { href: client!.mediaUrl(output.stock_url), download: '' }, picture);
      return element('li', {}, link, element('span', { textContent: `Result ${index + 1}: ${seed}` }));
    }),
  );
  gallery.hidden = outputs.length === 0;
}

async function loadHistory(): Promise<void> {
  if (!client) return;
  const status = $<HTMLSelectElement>('filter-status').value;
  const type = $<HTMLSelectElement>('filter-type').value;
  const result = await client.history({
    page,
    limit: PAGE_SIZE,
    ...(status ? { status: status as HistoryItem['status'] } : {}),
    ...(type ? { generation_type: type } : {}),
  });
  totalPages = Math.max(1, result.total_pages);
  // The page shown emptied (its last items deleted, here or elsewhere): the new last page takes its place.
  if (page > totalPages) {
    page = totalPages;
    return loadHistory();
  }
  shown = new Map(result.items.map((item) => [item.history_item_id, item.status]));
  $('page-label').textContent = `Page ${result.page} of ${totalPages} (${result.total} items)`;
  $<HTMLButtonElement>('previous-page').disabled = page <= 1;
  $<HTMLButtonElement>('next-page').disabled = page >= totalPages;
  $('history').replaceChildren(
    ...(result.items.length === 0
      ? [element('li', { textContent: 'Nothing here yet.' })]
      : result.items.map(historyRow)),
  );
}

function historyRow(item: HistoryItem): HTMLLIElement {
  const when = new Date(item.created_at).toLocaleString();
  const picture = item.preview_url
    ? element('img', { src: client!.mediaUrl(item.preview_url), alt: `Result of ${item.tool}, ${when}` })
    : element('span', { className: 'thumb-empty', textContent: '' });
  const actions = element('div', { className: 'actions' });
  const act = (label: string, className: string, work: () => Promise<unknown>, pressed?: boolean) => {
    const button = element('button', { type: 'button', className, textContent: label });
    button.setAttribute('aria-label', `${label}: ${item.tool}, ${when}`);
    if (pressed !== undefined) button.setAttribute('aria-pressed', String(pressed));
    button.addEventListener('click', () => void attempt(async () => (await work(), await loadHistory())));
    actions.append(button);
  };
  if (item.status === 'complete')
    act(
      'Like',
      'secondary',
      () => client!.like(item.history_item_id, item.like === true ? null : true),
      item.like === true,
    );
  if (item.status === 'pending') act('Cancel', 'secondary', () => client!.cancel(item.history_item_id));
  act('Delete', 'danger', () => client!.delete(item.history_item_id));
  const detail = item.status === 'error' ? ` — ${item.error?.message ?? ''}` : '';
  return element(
    'li',
    {},
    picture,
    element(
      'div',
      { className: 'what' },
      element('strong', { textContent: `${item.tool} · ${item.generation_type}` }),
      element('br'),
      `${item.status}${detail} · ${when}`,
    ),
    actions,
  );
}

$('key-form').addEventListener('submit', (event) => {
  event.preventDefault();
  void attempt(() => useKey($<HTMLInputElement>('api-key').value.trim()));
});
$('tools').addEventListener('change', (event) => {
  const target = event.target as HTMLInputElement;
  if (target.name === 'tool') void attempt(() => chooseTool(target.value));
});
$('generation-type').addEventListener('change', renderInputs);
$('job-form').addEventListener('submit', (event) => {
  event.preventDefault();
  void attempt(() => submitJob(event.target as HTMLFormElement));
});
$('history-filters').addEventListener('change', () => {
  page = 1;
  void attempt(loadHistory);
});
$('previous-page').addEventListener('click', () => {
  page = Math.max(1, page - 1);
  void attempt(loadHistory);
});
$('next-page').addEventListener('click', () => {
  page = Math.min(totalPages, page + 1);
  void attempt(loadHistory);
});

const saved = sessionStorage.getItem(KEY_STORAGE);
if (saved) {
  $<HTMLInputElement>('api-key').value = saved;
  void attempt(() => useKey(saved));
}
